import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn } from 'typeorm';

@Entity({ name: 'users' })
export class User {
  @PrimaryGeneratedColumn() id!: number;
  @Column({ type: 'text', unique: true }) email!: string;
  @CreateDateColumn({ type: 'timestamptz' }) createdAt!: Date;
}
